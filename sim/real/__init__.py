"""SIMULATOR. The simulator's real world (`COLONY_WORLD=real`): real Kubernetes control planes
(`components.controlplane`: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
KWOK) in place of the emulator, with the simulator's k0rdent, host provider, ServiceSet installs
and tenant gateway acting on them through the official `kubernetes` client (`kubeapi`).
"""
