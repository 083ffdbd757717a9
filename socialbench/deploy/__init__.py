"""Deployment files (compose, helm) generated from the registry, and the load job's helpers."""

GENERATE_COMMAND = "socialbench deploy generate"  # what the generated files' headers name
