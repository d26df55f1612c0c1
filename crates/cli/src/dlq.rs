//! `trawl dlq list` and `trawl dlq replay`: the dead-letter topic, for people.

use std::process::ExitCode;
use std::time::Duration;

use trawl_core::bus::Delivery;
use trawl_core::config::Config;
use trawl_core::records::DeadLetter;

/// The dead-letter topic every stage writes to.
pub const TOPIC: &str = trawl_core::bus::Topic::DeadLetters.name();
/// The consumer group of these commands.
const GROUP: &str = "trawl-dlq";

#[derive(clap::Subcommand)]
pub enum Command {
    /// Print the dead letters (topic, key, attempts, error) without removing them.
    List {
        /// One JSON object per dead letter, with its payload.
        #[arg(long)]
        json: bool,
    },
    /// Publish dead letters back to the topic they came from (after fixing the cause), and
    /// remove them from the dead-letter topic. Without filters, every one.
    Replay {
        /// Only letters from this topic (`files`, `chunks`).
        #[arg(long)]
        topic: Option<String>,
        /// Only letters with this key (a repository id).
        #[arg(long)]
        key: Option<String>,
        /// Print what would be replayed and change nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Every dead letter now on the topic, held (unsettled) until the caller settles them.
async fn read_all(cfg: &Config) -> anyhow::Result<(Vec<(Delivery, DeadLetter)>, Vec<Delivery>)> {
    let store = crate::existing_store(cfg)?;
    let bus = trawl_core::bus::from_config(&cfg.bus, &store)?;
    let mut sub = bus.subscribe(TOPIC, GROUP).await?;
    let mut letters = Vec::new();
    let mut unreadable = Vec::new();
    // Until the topic is quiet: every letter is delivered once, and held, so none repeats.
    // (`attempt` is no guide: the bus counts deliveries to this group across runs.)
    while let Ok(next) = tokio::time::timeout(Duration::from_secs(2), sub.recv()).await {
        let Some(d) = next? else { break };
        match DeadLetter::from_json(&d.payload) {
            Ok(l) => letters.push((d, l)),
            Err(e) => {
                eprintln!("dlq: an unreadable message (key {}): {e}", d.key);
                unreadable.push(d);
            }
        }
    }
    Ok((letters, unreadable))
}

pub async fn run(cfg: &Config, cmd: Command) -> anyhow::Result<ExitCode> {
    let (letters, _unreadable) = read_all(cfg).await?;
    match cmd {
        Command::List { json } => {
            for (_, l) in &letters {
                if json {
                    println!("{}", serde_json::to_string(l)?);
                } else {
                    println!(
                        "{:<8} {:<40} attempts {:<3} {}",
                        l.topic, l.key, l.attempts, l.error
                    );
                }
            }
            eprintln!("dlq: {} dead letters", letters.len());
            // Dropping the deliveries leaves every letter where it was.
        }
        Command::Replay {
            topic,
            key,
            dry_run,
        } => {
            let store = crate::existing_store(cfg)?;
            let bus = trawl_core::bus::from_config(&cfg.bus, &store)?;
            let mut replayed = 0;
            for (d, l) in letters {
                if topic.as_ref().is_some_and(|t| *t != l.topic)
                    || key.as_ref().is_some_and(|k| *k != l.key)
                {
                    continue;
                }
                println!("replay  {:<8} {}", l.topic, l.key);
                if dry_run {
                    continue;
                }
                // Published first, acknowledged after: a crash in between replays twice,
                // never zero times.
                bus.publish(&l.topic, &l.key, bytes::Bytes::from(l.payload.clone()))
                    .await?;
                d.ack().await?;
                replayed += 1;
            }
            eprintln!(
                "dlq: {replayed} dead letters replayed{}",
                if dry_run {
                    " (dry run: nothing changed)"
                } else {
                    ""
                }
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
