//! The store as an unlucky operator meets it: a repository removed from the list, a rollback
//! followed by gc, gc beside a running build, two compactors on the same S3 bucket.

use std::time::Duration;

use trawl_compactor::lease::Lease;
use trawl_compactor::{BuildOptions, CompactError, LiveDoc, Quiet};
use trawl_core::s3_testing::S3Server;
use trawl_core::store::Store;
use trawl_index::generation;
use trawl_index::testing::function_doc;

use crate::search::{index, ok, search_json, trawl};
use crate::support::{SourceRepo, file};

fn repo(name: &str, body: &str) -> SourceRepo {
    let src = SourceRepo::named(name);
    src.commit(&[("lib/main.py", file(body))], false);
    src
}

fn found(work: &std::path::Path, term: &str) -> bool {
    search_json(work, &[term, "--mode", "lexical", "-k", "3"])
        .iter()
        .any(|h| h["text"].as_str().is_some_and(|t| t.contains(term)))
}

#[test]
fn a_repository_removed_from_the_list_is_no_longer_searchable() {
    let a = repo("keeper", "def keeper_quokka():\n    return 1\n");
    let b = repo("leaver", "def leaver_narwhal():\n    return 2\n");
    let work = tempfile::tempdir().unwrap();
    index(work.path(), &[&a.path(), &b.path()], "hash");
    assert!(found(work.path(), "leaver_narwhal"));

    // The next run's list no longer names it: it leaves the index.
    index(work.path(), &[&a.path()], "hash");
    assert!(found(work.path(), "keeper_quokka"));
    assert!(
        !found(work.path(), "leaver_narwhal"),
        "a removed repository is still searchable"
    );

    // `--keep-others` adds without removing.
    let out = trawl(work.path())
        .args(["index", "--keep-others", "--embedder", "hash"])
        .arg(b.path())
        .output()
        .unwrap();
    ok(&out);
    assert!(found(work.path(), "keeper_quokka") && found(work.path(), "leaver_narwhal"));
}

#[test]
fn generation_numbers_are_never_printed_twice_across_rollback_and_gc() {
    let a = repo("gens", "def first_version():\n    return 1\n");
    let work = tempfile::tempdir().unwrap();
    let number = |text: &str| -> u64 {
        let at = text.find("generation ").expect("a generation number") + "generation ".len();
        text[at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let mut seen = vec![number(&index(work.path(), &[&a.path()], "hash"))];
    a.commit(
        &[("lib/main.py", file("def second_version():\n    return 2\n"))],
        false,
    );
    seen.push(number(&index(work.path(), &[&a.path()], "hash")));
    ok(&trawl(work.path())
        .args(["index", "rollback"])
        .output()
        .unwrap());
    let gc = ok(&trawl(work.path())
        .args(["compact", "--gc", "--set", "compact.gc_grace_secs=0"])
        .output()
        .unwrap());
    assert!(gc.contains("collected"), "{gc}");
    a.commit(
        &[("lib/main.py", file("def third_version():\n    return 3\n"))],
        false,
    );
    let next = number(&index(work.path(), &[&a.path()], "hash"));
    assert!(
        !seen.contains(&next),
        "generation {next} printed twice ({seen:?})"
    );
}

fn docs(n: u64) -> Vec<LiveDoc> {
    (0..n)
        .map(|i| LiveDoc {
            doc: function_doc(
                "github.com/acme/shop",
                &format!("src/m{i}.py"),
                &format!("handler_{i}"),
                &format!("def handler_{i}():\n    return {i}\n"),
                (1, 2),
            ),
            vector: None,
            prose: None,
        })
        .collect()
}

fn s3(server: &S3Server) -> Store {
    let opts = server.options();
    let opts: Vec<(&str, &str)> = opts.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Store::from_url_with("s3://trawl/org", &opts).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_compactors_on_one_s3_bucket_never_both_build_and_gc_waits_for_a_build() {
    // (The S3 test server checks `If-None-Match` before it writes, not atomically as S3
    // does, so the second compactor here starts once the first holds the lease.)
    let server = S3Server::start(&["trawl"]).await.unwrap();
    let (one, two) = (s3(&server), s3(&server));
    let opts = BuildOptions {
        shards: trawl_core::config::Shards::Fixed(2),
        threads: 1,
        ..BuildOptions::default()
    };
    let first = trawl_compactor::build(&one, docs(30), None, &opts, &Quiet)
        .await
        .unwrap();

    // The first compactor is building (it holds the lease): the second one, and gc, refuse
    // instead of writing beside it or deleting its files.
    let building = Lease::acquire(&one, "compactor one", Duration::from_secs(60))
        .await
        .unwrap();
    let refused = trawl_compactor::build(&two, docs(31), None, &opts, &Quiet)
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, CompactError::Busy(m) if m.contains("compactor one")),
        "{refused}"
    );
    let refused = trawl_compactor::gc(&two, 1, Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(refused, CompactError::Busy(_)), "{refused}");
    building.release().await.unwrap();

    // Each client claims its own number: a number is never handed out twice, so the loser
    // of a swap can never mistake the winner's CURRENT for its own.
    let second = trawl_compactor::build(&two, docs(31), None, &opts, &Quiet)
        .await
        .unwrap();
    assert!(second.generation > first.generation);
    trawl_index::generation::rollback(&one).await.unwrap();
    let report = trawl_compactor::gc(&one, 1, Duration::ZERO).await.unwrap();
    assert_eq!(report.collected, [second.generation]);
    let third = trawl_compactor::build(&one, docs(32), None, &opts, &Quiet)
        .await
        .unwrap();
    assert!(third.generation > second.generation, "{third:?}");
    let (cur, _) = generation::current(&two).await.unwrap().unwrap();
    assert_eq!(cur.generation, third.generation);
    assert_eq!(
        cur.manifest_hash.as_deref(),
        Some(
            generation::manifest_with_hash(&two, third.generation)
                .await
                .unwrap()
                .1
                .as_str()
        )
    );
}
