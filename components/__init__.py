"""Real third-party servers for the project's own tooling, built from the Go module proxy.

`components.build` builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK and
the Temporal server from pinned wrapper modules (`components/go/<name>/`) into a cache outside the
work tree. The modules beside it run them: real control planes for tests, benchmarks and the
simulator's real world. Nothing of the product imports this package; tests, `bench/`, `sim/` and
the dev tooling (`starter/dev/`) do.
"""
