"""trials stage."""
