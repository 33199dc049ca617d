"""SIMULATOR. Simulated infrastructure for Colony: NOT a real Kubernetes, k0rdent or cloud.

`sim/` is a product of its own: a Kubernetes API emulator served over real HTTPS (so the official
`kubernetes` client and `kubectl` work unchanged), simulated controllers (k0rdent/KCM, Cluster API,
kubelet, scheduler) and a simulated host provider. Colony's product code never imports it; it only
receives the kubeconfig, URL and key the sim writes, exactly as it would for real infrastructure.

Deliberate simplifications (each documented where it lives, and listed in CONTRACT.md):
authentication is real (bearer tokens a cluster issued, TLS with the sim's CA) but authorization is
not: RBAC objects are stored and served, never enforced; CEL rules (`x-kubernetes-validations`) in
CRDs are not evaluated; the wire format is JSON or YAML only (protobuf bodies, which kubectl's
typed `create configmap|secret|namespace` generators send, get 415 Unsupported Media Type).
Containers run nothing: the kubelet interprets a few commands (echo, sh -c, sleep, nvidia-smi) to
produce their output, exit codes and logs, and lets anything else run until deleted; the Gateway
API controller writes status but forwards no traffic.

Layout:
    apiserver/    the emulator: object store, selectors, patches, schema validation, HTTP, auth
    controllers/  what would run in a real system: kubelet, node lifecycle, scheduler, daemonsets,
                  deployments, a Gateway API implementation, k0rdent
    hostprovider/ the HTTP API whole hosts are claimed from
    faults.py     fault injection shared by every simulated endpoint
    world.py      assembles the whole simulated world in one process (`python -m sim`)
"""
