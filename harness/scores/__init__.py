"""scores stage."""
