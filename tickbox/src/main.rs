//! `tickbox`: the command line. Everything it does is the library's [`tickbox::run`].

fn main() -> std::process::ExitCode {
    tickbox::run()
}
