//! `bpals-release access`: sync paid licenses to the gated release, and total the ledger.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::{HubArgs, JsonArg};
use bpals_release::access::{self, report::Period};
use bpals_release::release_spec;

#[derive(Args)]
pub struct AccessArgs {
    #[command(subcommand)]
    command: AccessCommand,
}

#[derive(Subcommand)]
enum AccessCommand {
    /// Grant the gated release to every buyer with a valid license, revoke ended and refunded
    /// ones, and record each new sale in the ledger. Idempotent: a rerun changes nothing.
    Sync(SyncArgs),
    /// Verify the ledger's hash chain and print sales, refunds and the pledge owed, per period
    /// and currency.
    Report(ReportArgs),
}

/// `--ledger`: the sales ledger.
#[derive(Args)]
struct LedgerArg {
    /// The sales ledger (JSON lines, hash-chained; commit it with the release's audit trail).
    #[arg(long, default_value = access::DEFAULT_LEDGER)]
    ledger: PathBuf,
}

#[derive(Args)]
struct SyncArgs {
    /// The commercial release spec: its tier, its gated publish.repo and its pledge schedule.
    spec: PathBuf,
    /// The payments export: header order_id,hf_username,tier,amount,currency,paid_date, or a
    /// Stripe payments export with hf_username and tier in the charge's metadata.
    #[arg(long)]
    payments: PathBuf,
    /// Dataset repo ORG/NAME [default: the spec's publish.repo].
    #[arg(long)]
    repo: Option<String>,
    #[command(flatten)]
    ledger: LedgerArg,
    /// Judge licenses on this day (YYYY-MM-DD) [default: today, UTC].
    #[arg(long, value_name = "DATE")]
    as_of: Option<chrono::NaiveDate>,
    /// Print the plan; change nothing on the Hub and write no ledger line.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    hub: HubArgs,
    #[command(flatten)]
    json: JsonArg,
}

#[derive(Args)]
struct ReportArgs {
    #[command(flatten)]
    ledger: LedgerArg,
    /// Totals per month, quarter or year.
    #[arg(long, value_enum, default_value_t = PeriodArg::Month)]
    period: PeriodArg,
    #[command(flatten)]
    json: JsonArg,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum PeriodArg {
    Month,
    Quarter,
    Year,
}

impl From<PeriodArg> for Period {
    fn from(p: PeriodArg) -> Self {
        match p {
            PeriodArg::Month => Period::Month,
            PeriodArg::Quarter => Period::Quarter,
            PeriodArg::Year => Period::Year,
        }
    }
}

pub fn run(args: AccessArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        AccessCommand::Sync(a) => sync(a),
        AccessCommand::Report(a) => {
            let ledger = access::Ledger::open(&a.ledger.ledger)?;
            a.json.print(&access::report::report(&ledger, a.period.into())?)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn sync(args: SyncArgs) -> anyhow::Result<ExitCode> {
    let spec = release_spec::load(&args.spec)?;
    let options = access::SyncOptions {
        payments: args.payments,
        ledger: args.ledger.ledger,
        repo: args.repo,
        patience: args.hub.patience(),
        endpoint: args.hub.endpoint,
        today: args.as_of.unwrap_or_else(|| chrono::Utc::now().date_naive()),
        dry_run: args.dry_run,
    };
    let outcome = access::sync(&spec, &options, &|m| eprintln!("{m}"))?;
    args.json.print(&outcome)?;
    Ok(ExitCode::SUCCESS)
}
