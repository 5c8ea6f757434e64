"""One module per srl-launch subcommand, each with parser() (its options, for --help and completion) and
main(argv) -> exit code; launcher.cli dispatches to them. What they share is common.py."""
