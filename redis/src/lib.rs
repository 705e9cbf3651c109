//! Node-ID leases on Redis (in progress on this branch: the scripts are in
//! `/work/notes/redis-design.md`; nothing here is wired to the lease kernel yet).
