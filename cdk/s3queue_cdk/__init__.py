"""The S3Queue CDK app: one Stack composed of small Constructs, one module per component."""
