//! Throwaway kube server for tests (being built).
