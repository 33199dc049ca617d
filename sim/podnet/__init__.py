"""SIMULATOR. The simulated pod network: in-memory connections to simulated containers' ports
(`pipe`), the small servers those containers run (`apps`), and which pod ports listen and which
pods a Service sends to (`network`)."""
