//! The bring-your-own-backend example (`examples/custom_backend.rs`) passes the conformance suite:
//! the example keeps its toy lock honest, and this keeps the example working.

// Its `main` only prints what `run_suite` returns.
#[allow(dead_code)]
#[path = "../examples/custom_backend.rs"]
mod custom_backend;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_toy_lock_of_the_custom_backend_example_passes_every_case() {
    let results = custom_backend::run_suite().await;
    let failed: Vec<String> = results
        .iter()
        .filter_map(|(name, r)| r.as_ref().err().map(|why| format!("{name}: {why}")))
        .collect();
    assert!(failed.is_empty(), "failed cases: {failed:#?}");
}
