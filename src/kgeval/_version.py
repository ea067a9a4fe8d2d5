"""The package version, in a leaf module so any layer can stamp it on what it writes without importing
the package facade ``kgeval/__init__``."""

__version__ = "0.1.0"
