"""Model backends in their own processes: starting them and speaking to them."""
