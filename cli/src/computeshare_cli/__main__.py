from computeshare_cli.main import main

main()
