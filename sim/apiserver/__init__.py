"""SIMULATOR. The Kubernetes API emulator: one in-memory store per cluster behind an HTTPS server."""
