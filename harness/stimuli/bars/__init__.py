"""Bar-chart ratio battery (Cleveland-McGill position-length task): Haehn and GRAPE stimuli."""
