//! The store on S3: object_store's S3 client against a local S3-API server (s3s-fs, which
//! checks SigV4 signatures and conditional puts), with throttling and timeouts injected.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use trawl_core::s3_testing::S3Server;
use trawl_core::store::{MULTIPART_THRESHOLD, Store};

fn store(server: &S3Server, url: &str, timeout: &str) -> Store {
    let opts = server.options();
    let mut opts: Vec<(&str, &str)> = opts.iter().map(|(k, v)| (*k, v.as_str())).collect();
    opts.push(("aws_timeout", timeout));
    Store::from_url_with(url, &opts).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_on_s3_objects_conditional_current_and_multipart() {
    let server = S3Server::start(&["trawl"]).await.unwrap();
    let s = store(&server, "s3://trawl/org", "30s");
    s.put("a/one.json", Bytes::from_static(b"1")).await.unwrap();
    s.put("a/two.json", Bytes::from_static(b"2")).await.unwrap();
    assert_eq!(s.list("a/").await.unwrap(), ["a/one.json", "a/two.json"]);
    assert_eq!(s.get("a/one.json").await.unwrap().unwrap(), "1");
    assert!(s.get("a/missing").await.unwrap().is_none());
    // Under the prefix on the server's disk.
    assert!(server.root().join("trawl/org/a/one.json").is_file());

    // CURRENT: created once, then swapped only from the version read.
    assert!(s.create("CURRENT", Bytes::from_static(b"1")).await.unwrap());
    assert!(!s.create("CURRENT", Bytes::from_static(b"x")).await.unwrap());
    let (_, v1) = s.get_versioned("CURRENT").await.unwrap().unwrap();
    assert!(
        s.swap("CURRENT", Bytes::from_static(b"2"), Some(&v1))
            .await
            .unwrap()
    );
    // A writer still holding the old version loses, and changes nothing.
    assert!(
        !s.swap("CURRENT", Bytes::from_static(b"3"), Some(&v1))
            .await
            .unwrap()
    );
    assert_eq!(s.get("CURRENT").await.unwrap().unwrap(), "2");

    // Large objects go up in parts and come back whole.
    let big: Vec<u8> = (0..MULTIPART_THRESHOLD + 5_000_000)
        .map(|i| (i % 251) as u8)
        .collect();
    s.put("index/gen=1/big.bin", Bytes::from(big.clone()))
        .await
        .unwrap();
    assert_eq!(s.get("index/gen=1/big.bin").await.unwrap().unwrap(), big);

    s.delete("a/one.json").await.unwrap();
    s.delete("a/one.json").await.unwrap();
    assert_eq!(s.list("a/").await.unwrap(), ["a/two.json"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_on_s3_survives_throttling_and_timeouts() {
    let server = S3Server::start(&["trawl"]).await.unwrap();
    let s = store(&server, "s3://trawl", "1s");
    let f = &server.faults;
    f.unavailable_every.store(3, Ordering::Relaxed);
    f.stall_every.store(7, Ordering::Relaxed);
    f.stall_ms.store(1_500, Ordering::Relaxed);
    for i in 0..30 {
        s.put(&format!("parts/{i}.bin"), Bytes::from(vec![i as u8; 1000]))
            .await
            .unwrap();
    }
    assert!(s.create("CURRENT", Bytes::from_static(b"1")).await.is_ok());
    for g in 2..6u8 {
        let (_, v) = s.get_versioned("CURRENT").await.unwrap().unwrap();
        assert!(
            s.swap("CURRENT", Bytes::from(vec![g]), Some(&v))
                .await
                .unwrap()
        );
    }
    f.unavailable_every.store(0, Ordering::Relaxed);
    f.stall_every.store(0, Ordering::Relaxed);
    assert_eq!(s.list("parts/").await.unwrap().len(), 30);
    for i in 0..30 {
        let b = s.get(&format!("parts/{i}.bin")).await.unwrap().unwrap();
        assert_eq!(b, vec![i as u8; 1000]);
    }
    assert_eq!(s.get("CURRENT").await.unwrap().unwrap(), vec![5u8]);
    assert!(f.unavailable.load(Ordering::Relaxed) >= 10);
    assert!(f.stalled.load(Ordering::Relaxed) >= 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_on_s3_with_a_wrong_secret_says_so() {
    let server = S3Server::start(&["trawl"]).await.unwrap();
    let endpoint = &server.endpoint;
    let s = Store::from_url_with(
        "s3://trawl",
        &[
            ("aws_access_key_id", trawl_core::s3_testing::ACCESS_KEY),
            ("aws_secret_access_key", "not-the-secret"),
            ("aws_endpoint", endpoint),
            ("aws_allow_http", "true"),
        ],
    )
    .unwrap();
    let err = s
        .put("probe.json", Bytes::from_static(b"x"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("probe.json"), "{err}");
    assert!(
        err.contains("403") || err.to_lowercase().contains("signature"),
        "{err}"
    );
}
