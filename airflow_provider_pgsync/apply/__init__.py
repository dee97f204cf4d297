"""Apply: changelog batches into destinations, with the baseline hand-off (DESIGN §2 rules 4-9)."""
