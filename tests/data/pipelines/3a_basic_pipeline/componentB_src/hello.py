print("Hello from component B")
