//! What a process's first request pays before it encodes: loading the encoder (the files'
//! checksums, the tokenizer, the weights) and the first request in 16-bit products (their
//! packing), then a second request. Each round loads the model again.
//!
//!   encoder_load [--model DIR] [--rounds N]      (DIR: $PG_SKILLS_MODEL_DIR or the default)

use std::path::PathBuf;
use std::time::Instant;

use pg_skills_kernels::encoder::{verify_model_dir, Encoder, Precision, DEFAULT_MODEL_DIR};

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let mut dir = std::env::var_os("PG_SKILLS_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_MODEL_DIR));
    let mut rounds = 5;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--model" => dir = PathBuf::from(args.next().expect("--model DIR")),
            "--rounds" => rounds = args.next().expect("--rounds N").parse().expect("a number"),
            other => panic!("unknown argument {other}"),
        }
    }
    let precision = if Precision::int16_available() {
        Precision::Int16
    } else {
        Precision::F32
    };
    println!("| round | checksums alone ms | Encoder::load ms | first request ({precision:?}) ms | second ms |");
    println!("|---|---|---|---|---|");
    for round in 1..=rounds {
        let t = Instant::now();
        verify_model_dir(&dir).expect("the model's files");
        let checksums = t.elapsed();
        let t = Instant::now();
        let encoder = Encoder::load(&dir).expect("the model loads");
        let load = t.elapsed();
        let t = Instant::now();
        encoder
            .embed_queries(&["which commit broke the nightly build"], precision)
            .unwrap();
        let first = t.elapsed();
        let t = Instant::now();
        encoder
            .embed_queries(&["which test is flaky in CI"], precision)
            .unwrap();
        let second = t.elapsed();
        println!(
            "| {round} | {:.1} | {:.1} | {:.1} | {:.2} |",
            ms(checksums),
            ms(load),
            ms(first),
            ms(second)
        );
    }
}
