#!/usr/bin/env node
// The command-line entry point; each subcommand lives in src/cli/<name>.ts and exports `run(argv)`.
import { main } from "../src/cli/main.ts";

process.exitCode = await main(process.argv.slice(2));
