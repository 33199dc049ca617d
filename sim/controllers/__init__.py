"""SIMULATOR. Simulated controllers (kubelet, scheduler, daemonsets, k0rdent) acting on emulator stores."""
