"""What pgsync knows about the source database: names, fitness checks, publications."""
