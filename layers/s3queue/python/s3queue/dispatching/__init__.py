"""The dispatcher: one coordinator per queue leads, lists, plans and publishes tickets."""
