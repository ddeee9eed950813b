from rmqtool.app import main

main()
