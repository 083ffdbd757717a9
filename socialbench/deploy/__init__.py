"""Deployment files (compose, helm) generated from the registry, and the load job's helpers."""
