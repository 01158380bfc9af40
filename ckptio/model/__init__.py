"""Pure data of ckptio: typed records with one JSON boundary each. No MPI, no files (issue 24's model layer)."""
