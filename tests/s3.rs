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

/// Runs `trawl index` on a store in the test server, with credentials only from an AWS
/// profile whose `credential_process` prints `secret`.
fn index_with_profile(server: &S3Server, secret: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("creds.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho '{{\"Version\": 1, \"AccessKeyId\": \"{}\", \"SecretAccessKey\": \"{secret}\"}}'\n",
            trawl_core::s3_testing::ACCESS_KEY
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config = dir.path().join("config");
    std::fs::write(
        &config,
        format!(
            "[profile ci]\nregion = us-east-1\ncredential_process = {}\n",
            script.display()
        ),
    )
    .unwrap();
    let src = crate::support::SourceRepo::named("profiled");
    src.commit(
        &[(
            "lib/a.py",
            crate::support::file("def profiled_credentials():\n    return 1\n"),
        )],
        false,
    );
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_trawl"));
    for (k, _) in std::env::vars() {
        if k.starts_with("TRAWL_") || k.starts_with("AWS_") {
            cmd.env_remove(k);
        }
    }
    cmd.current_dir(dir.path())
        .env("AWS_CONFIG_FILE", &config)
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            dir.path().join("no-credentials"),
        )
        .env("AWS_PROFILE", "ci")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT", &server.endpoint)
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_TIMEOUT", "5s")
        .args([
            "--store",
            "s3://trawl/org",
            "--set",
            "fetch.cache_dir=mirrors",
        ])
        .args(["index", "--embedder", "hash"])
        .arg(src.path())
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_credentials_come_from_an_aws_profile_through_the_sdk_chain() {
    let server = S3Server::start(&["trawl"]).await.unwrap();
    // credential_process is a source object_store does not read: only the SDK's chain does.
    let out = index_with_profile(&server, trawl_core::s3_testing::SECRET_KEY);
    assert!(
        out.status.success(),
        "stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(server.root().join("trawl/org/index/CURRENT").is_file());
    // The keys really come from the process: wrong ones are refused by the server.
    let out = index_with_profile(&server, "not-the-secret");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr).to_lowercase();
    assert!(
        stderr.contains("403") || stderr.contains("signature") || stderr.contains("access denied"),
        "{stderr}"
    );
}
