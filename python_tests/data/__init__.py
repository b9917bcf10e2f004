"""fedkernels.data: readers, formats, partitioners, the synthetic generator and the fetcher."""
