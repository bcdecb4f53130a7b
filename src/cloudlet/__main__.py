from cloudlet.cli.main import app

app()
