"""`workbench preflight PROFILE --node K` (#39): before a multi-machine run, on each machine, a short rendezvous
of the real kind (machine 0 listens on the profile's address and port) that checks what a run would otherwise
find out hours in or never: the address, the ranks, the versions, the shared output folder, the backend."""
