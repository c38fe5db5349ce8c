//! Throwaway redis server for tests (being built).
