fn main() -> std::process::ExitCode {
    envc::cli::main()
}
