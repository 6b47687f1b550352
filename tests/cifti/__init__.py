"""Tests of connscale.cifti: parcellation, maps and connectomes of grayordinates."""
