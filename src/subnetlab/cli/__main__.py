from subnetlab.cli import main

main()
