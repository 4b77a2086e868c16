"""readouts stage."""
