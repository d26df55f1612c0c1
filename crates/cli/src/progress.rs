//! A live one-line status for long-running stages: a spinner, the elapsed time, and a message
//! refreshed from the stage's counters four times a second.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

pub struct Live {
    pub bar: ProgressBar,
    ticker: tokio::task::JoinHandle<()>,
}

impl Live {
    /// Starts the display; `message` is called on every refresh.
    pub fn start(message: impl Fn() -> String + Send + 'static) -> Self {
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {prefix} {msg}")
                .expect("a valid template"),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        let ticker = {
            let bar = bar.clone();
            tokio::spawn(async move {
                loop {
                    bar.set_message(message());
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            })
        };
        Self { bar, ticker }
    }

    /// Stops and clears the display.
    pub fn finish(self) {
        self.ticker.abort();
        self.bar.finish_and_clear();
    }
}
