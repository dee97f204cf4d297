"""PostgreSQL column types and how they map to the destinations' types (DESIGN §6)."""
