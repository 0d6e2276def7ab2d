"""nsightwrap's version: a leaf module, so that the CLI (a layer below the package's face) prints it without
importing the package's __init__, which re-exports it as nsightwrap.__version__."""

__version__ = "0.1.0"
