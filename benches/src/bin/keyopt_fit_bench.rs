//! KeyOpt fit time against the size of the history: 10^3 … 10^6 arms of simulated support runs
//! (`keyopt::simulate::World`: 1,000 skills, 50 topics, 512-d keys, 10 arms per run, 4 runs per
//! source question), one fit each (cross-validation included), on this machine's cores.
//!
//!   cargo run --release -p pg_skills_benches --bin keyopt_fit_bench [-- --max-arms 1000000]

use std::time::Instant;

use clap::Parser;

use pg_skills_kernels::keyopt::fit::{fit, FitOptions};
use pg_skills_kernels::keyopt::simulate::World;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 1_000_000)]
    max_arms: usize,
}

fn main() {
    let args = Args::parse();
    let world = World::new(42, 1000, 50, 512);
    println!(
        "threads: {}\n\n| arms | runs | discordant tasks | weighted pairs | fit s | β iterations | Δk iterations | chosen |\n|---|---|---|---|---|---|---|---|",
        rayon::current_num_threads()
    );
    let mut arms = 1000;
    while arms <= args.max_arms {
        let support = world.support(arms as u64, arms / 10, 4, 10);
        let started = Instant::now();
        let fitted = fit(&world.skill_keys, &support, &FitOptions::default());
        let seconds = started.elapsed().as_secs_f64();
        let r = &fitted.report;
        println!(
            "| {} | {} | {} | {:.0} | {seconds:.2} | {} | {} | {} |",
            r.arms,
            r.events,
            r.discordant_groups,
            r.pairs,
            r.beta_iterations,
            r.dk_iterations,
            fitted.settings.to_json()
        );
        arms *= 10;
    }
}
