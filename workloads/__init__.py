"""What the suite sends (workloads) and the tools that send it."""
