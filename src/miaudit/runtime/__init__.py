"""How work runs on this machine: torch device, CPU threads, the heap, progress bars."""
