from .cli.main import console

console()
