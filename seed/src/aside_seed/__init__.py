"""aside-seed: Faker-made users loaded into PostgreSQL with COPY (see seed/README.md)."""
