"""Scripts under bench/: the quick list, --isa, the peers and the plots."""
