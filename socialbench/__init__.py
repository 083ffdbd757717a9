"""socialbench: the DeathStarBench social network in Python, and the tools to measure it."""

__version__ = "0.1.0"
