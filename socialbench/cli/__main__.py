"""'python -m socialbench.cli': the socialbench command (what the load job's drivers run)."""

from socialbench.cli import app

if __name__ == "__main__":
    app(prog_name="socialbench")
