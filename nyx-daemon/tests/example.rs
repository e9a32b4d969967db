//! The `fetch_page` example runs: a page fetched through an in-process testnet by an
//! embedded client node arrives whole.

#![allow(clippy::unwrap_used)]

#[path = "../examples/fetch_page.rs"]
#[allow(dead_code)]
mod fetch_page;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fetch_page_example_fetches_the_page() {
    let response = fetch_page::fetch().await.unwrap();
    assert!(response.starts_with("HTTP/1.0 200 OK\r\n"), "{response}");
    assert!(response.ends_with(fetch_page::PAGE), "{response}");
}
