"""Scripts cloudlet copies into a deployment's code to run inside its environment (not the server's
or the agent's): they import what that environment has (mlflow, pandas), never cloudlet."""
