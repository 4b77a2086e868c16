"""stimuli stage."""
