"""CDK entry point (``cdk.json``'s ``app``): ``cdk synth`` and ``cdk deploy`` run this file."""

from aws_cdk import App
from s3queue_cdk.app import build

app = App()
build(app)
app.synth()
