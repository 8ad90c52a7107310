"""Edge-level circuits of a known mechanism: induction heads in a small GPT-2 trained here."""
