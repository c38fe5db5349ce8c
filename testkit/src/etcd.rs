//! Throwaway etcd server for tests (being built).
