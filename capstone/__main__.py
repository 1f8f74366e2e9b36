from capstone.cli import console_main

console_main()
