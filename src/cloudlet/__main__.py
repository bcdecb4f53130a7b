from cloudlet.startup import cli

cli()
