"""Document understanding: layout, structured pages, and document question answering / fields."""
