"""Book extraction: nv-recall of long generations against the reference book."""
